-- A push's pack may go up to the git bucket while git is still receiving it, in chunks of `chunk_bytes` bytes that
-- are objects of their own (`repos/<id>/upload-<upload>.pack.<n>`), since the pack's name (its checksum) is known
-- only at the end. A cache downloads the chunks one after the other into one file. NULL: the pack is one object.
ALTER TABLE git_packs ADD COLUMN chunk_bytes bigint CHECK (chunk_bytes > 0);
