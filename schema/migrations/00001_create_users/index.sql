-- Users as the consumer stores them. The id is minted by the API (UUIDv7, so
-- inserts append to the right edge of the primary-key index), which is what
-- makes redelivery harmless: the consumer inserts with ON CONFLICT (id) DO NOTHING.
-- The name rules mirror queue/envelope.ts (NAME_MAX_LENGTH = 200 code points).
CREATE TABLE users (
  id uuid PRIMARY KEY,
  name text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
  -- when the API queued the user (its clock)
  enqueued_at timestamptz NOT NULL,
  -- when the consumer's transaction stored it (the database's clock)
  stored_at timestamptz NOT NULL DEFAULT now()
);
