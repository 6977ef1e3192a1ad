-- Idempotency-Key on create: a retried request (same key, same body) gets the same run.
CREATE TABLE idempotency_keys (
    tenant_id    TEXT NOT NULL,
    key          TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    response_id  TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
