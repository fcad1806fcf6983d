-- What a job's work recorded mid-way for a runner that takes it over after its process died: an SQL restore notes
-- its transaction's id on the data server before it commits, so the next runner asks the server whether that
-- transaction committed instead of applying the snapshot a second time over what the app wrote since.
ALTER TABLE jobs ADD COLUMN handover jsonb;
