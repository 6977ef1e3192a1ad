-- Everything the model saw of a run's output, in order, including items of hidden tools that
-- `body.output` leaves out. Continuations and resumed runs are built from it.
ALTER TABLE responses ADD COLUMN transcript JSONB NOT NULL DEFAULT '[]'::jsonb;
