-- Where each output item of a stopped or paused run can be found by its id, and a client call
-- by its call id: `item_reference` input items, replayed server items whose content the client
-- left out, and replayed answers to a paused run are resolved through it. `item` is the item as
-- the run produced it (JSON text). Written when a run pauses or stops (not for `store: false`
-- runs that stopped), deleted with the run.
CREATE TABLE output_items (
    response_id TEXT NOT NULL,
    item_id     TEXT NOT NULL,
    tenant_id   TEXT NOT NULL,
    call_id     TEXT,
    item        TEXT NOT NULL,
    PRIMARY KEY (response_id, item_id)
);
CREATE INDEX output_items_item_id ON output_items (tenant_id, item_id);
CREATE INDEX output_items_call_id ON output_items (tenant_id, call_id) WHERE call_id IS NOT NULL;
-- Input items by id, for `item_reference`s to them.
CREATE INDEX input_items_tenant_item ON input_items (tenant_id, item_id);
