-- Jobs: work that can outgrow an HTTP request (a pre-deploy checkpoint's dump first), recorded here so that any API
-- replica can run it, a client that goes away does not cancel it, and a process that dies mid-way leaves a row
-- another replica takes over (or fails cleanly) once its lease lapses.

CREATE TABLE jobs (
    id uuid PRIMARY KEY,
    -- What the job does (`checkpoint`).
    kind text NOT NULL,
    -- What runs one at a time: a channel's jobs are `channel:<id>`.
    scope text NOT NULL,
    app_id uuid,
    channel_id uuid,
    -- What the job is for, at most one of a kind that has not failed: a deploy's checkpoint is `deploy:<id>`.
    subject text,
    -- What the work needs, per kind.
    params jsonb NOT NULL DEFAULT '{}',
    state text NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed')),
    bytes_done bigint NOT NULL DEFAULT 0,
    -- Null while the size of the work is not known.
    bytes_total bigint,
    -- Claims so far (a takeover after a process died is one more); past max_attempts the job fails.
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    -- The process running it, its last heartbeat, and until when its claim holds without another (for a queued
    -- job put back because the platform was busy: not before).
    runner text,
    heartbeat_at timestamptz,
    lease_until timestamptz,
    -- Why it failed, in words for the person who asked.
    error text,
    -- What it produced, per kind.
    result jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    finished_at timestamptz
);
-- One job runs per scope: the index, not a check in the code, keeps two replicas from running two.
CREATE UNIQUE INDEX jobs_one_running_per_scope ON jobs (scope) WHERE state = 'running';
CREATE UNIQUE INDEX jobs_one_per_subject ON jobs (kind, subject) WHERE subject IS NOT NULL AND state <> 'failed';
CREATE INDEX jobs_unfinished ON jobs (created_at) WHERE state IN ('queued', 'running');
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
