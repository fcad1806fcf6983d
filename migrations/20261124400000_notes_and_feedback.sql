-- Feedback (to the platform, or about one app) and per-app threads of append-only notes with votes. Notes are
-- what members and their agents write to each other; the platform never acts on them.

CREATE TABLE feedback (
    id bigserial PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- The app it is about; null for feedback on the platform itself.
    app_id uuid,
    message text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX feedback_platform ON feedback (user_id, id) WHERE app_id IS NULL;
CREATE INDEX feedback_app ON feedback (app_id, id) WHERE app_id IS NOT NULL;

CREATE TABLE note_threads (
    app_id uuid NOT NULL,
    -- 1, 2, 3... per app: how threads are addressed.
    number integer NOT NULL CHECK (number > 0),
    title text NOT NULL,
    author_id uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app_id, number)
);

CREATE TABLE notes (
    id bigserial PRIMARY KEY,
    app_id uuid NOT NULL,
    thread integer NOT NULL,
    body text NOT NULL,
    author_id uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (app_id, thread) REFERENCES note_threads (app_id, number) ON DELETE CASCADE
);
CREATE INDEX notes_thread ON notes (app_id, thread, id);

-- One vote per person per note; a vote of 0 is the absence of a row.
CREATE TABLE note_votes (
    note_id bigint NOT NULL REFERENCES notes (id) ON DELETE CASCADE,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    value smallint NOT NULL CHECK (value IN (-1, 1)),
    PRIMARY KEY (note_id, user_id)
);
