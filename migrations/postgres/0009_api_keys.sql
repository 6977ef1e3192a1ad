-- API keys: each belongs to a tenant. Only a hash of the secret is kept (SHA-256: a key is 256
-- random bits, so a slow hash would add nothing); `prefix` shows which key a row is. `policy`
-- is JSON: the tool servers and models the key may use, its request rate and concurrent runs.
CREATE TABLE api_keys (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    name        TEXT NOT NULL,
    hash        TEXT NOT NULL UNIQUE,
    prefix      TEXT NOT NULL,
    policy      TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    revoked_at  BIGINT
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

-- Token usage per tenant, key, model and UTC day, added to as runs stop.
CREATE TABLE usage (
    tenant_id      TEXT NOT NULL,
    key_id         TEXT NOT NULL,
    model          TEXT NOT NULL,
    day            TEXT NOT NULL,
    runs           BIGINT NOT NULL,
    input_tokens   BIGINT NOT NULL,
    cached_tokens  BIGINT NOT NULL,
    output_tokens  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, key_id, model, day)
);

-- The key a run was created with (its usage and its key's policy follow the run when it is
-- resumed or taken over); none in open mode.
ALTER TABLE responses ADD COLUMN key_id TEXT;
