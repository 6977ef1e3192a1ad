-- When a run waiting in requires_action stops waiting (milliseconds).
ALTER TABLE responses ADD COLUMN expires_at BIGINT;
CREATE INDEX responses_expiry ON responses (state, expires_at);
