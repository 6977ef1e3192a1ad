-- Conversations (the Conversations API): a tenant's list of items kept on the server. Items
-- are ordered by `seq`, a number handed out under the conversation's row (`next_seq`), never by
-- time; an item's key includes its conversation, so one item may be in several. `item` is the
-- item exactly as a Response shows it (JSON text). `active_run` is the response that holds the
-- conversation (one at a time): set as it is stored or resumed, cleared in the transaction
-- that stores it stopped or paused.
CREATE TABLE conversations (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    metadata    TEXT NOT NULL,
    next_seq    BIGINT NOT NULL DEFAULT 0,
    active_run  TEXT
);
CREATE INDEX conversations_tenant ON conversations (tenant_id);
-- The conversation a deleted response held is found by it.
CREATE INDEX conversations_active_run ON conversations (active_run);

CREATE TABLE conversation_items (
    conversation_id  TEXT NOT NULL,
    seq              BIGINT NOT NULL,
    item_id          TEXT NOT NULL,
    item             TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    PRIMARY KEY (conversation_id, seq),
    UNIQUE (conversation_id, item_id)
);

-- Only adds tables: binaries that know migration 10 run on it.
INSERT INTO schema_compat (version, requires) VALUES (11, 10);
