-- The event log in frames: a row holds a run's consecutive events written in one batch,
-- `events` a JSON array of `[offset, "type", event]` entries (the emit time in milliseconds
-- after `created_at`, the event's type, its JSON text as sent), numbered `first_seq` to
-- `last_seq` (see src/store/frames.rs). The primary key is `(response_id, last_seq)`: the
-- frames holding the events after a number are a range of it.
CREATE TABLE response_event_frames (
    response_id  TEXT NOT NULL,
    last_seq     BIGINT NOT NULL,
    first_seq    BIGINT NOT NULL,
    tenant_id    TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    events       TEXT NOT NULL,
    PRIMARY KEY (response_id, last_seq)
);

-- Every stored event becomes a frame of its own.
INSERT INTO response_event_frames (response_id, last_seq, first_seq, tenant_id, created_at, events)
SELECT response_id, sequence_number, sequence_number, tenant_id, created_at,
       '[[0,' || json_quote(event_type) || ',' || data || ']]'
FROM response_events;

DROP TABLE response_events;

-- A change of format: binaries that do not know frames cannot read the log.
INSERT INTO schema_compat (version, requires) VALUES (12, 12);
