-- Every row belongs to a tenant; one default tenant until API keys arrive.
CREATE TABLE tenants (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
INSERT INTO tenants (id, name, created_at) VALUES ('default', 'default', 0);

-- One row per response (run). `body` is the Response object as last rendered; `state` is the
-- authoritative run state (SPEC §3), changed only by compare-and-set.
CREATE TABLE responses (
    id                   TEXT PRIMARY KEY,
    tenant_id            TEXT NOT NULL REFERENCES tenants (id),
    state                TEXT NOT NULL,
    previous_response_id TEXT,
    store                BOOLEAN NOT NULL,
    created_at           BIGINT NOT NULL,
    updated_at           BIGINT NOT NULL,
    -- The instance executing the run and until when its claim holds (milliseconds).
    lease_owner          TEXT,
    lease_expires_at     BIGINT,
    body                 JSONB NOT NULL
);
CREATE INDEX responses_state ON responses (state, lease_expires_at);
CREATE INDEX responses_tenant_created ON responses (tenant_id, created_at);

-- The input items of each response, in order.
CREATE TABLE input_items (
    response_id TEXT NOT NULL,
    position    BIGINT NOT NULL,
    tenant_id   TEXT NOT NULL,
    item_id     TEXT NOT NULL,
    item        JSONB NOT NULL,
    PRIMARY KEY (response_id, position)
);
CREATE INDEX input_items_item_id ON input_items (response_id, item_id);

-- The append-only event log: the exact JSON text each SSE subscriber received (TEXT, not
-- JSONB, so a replay is byte for byte what was streamed live).
CREATE TABLE response_events (
    response_id     TEXT NOT NULL,
    sequence_number BIGINT NOT NULL,
    tenant_id       TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    data            TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    PRIMARY KEY (response_id, sequence_number)
);
