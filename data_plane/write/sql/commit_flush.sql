-- The whole flush commit in one statement (infra/migrations/0007_commit_flush.sql); one base
-- offset per block, in the order of the arrays.
SELECT qc_commit_flush AS base_offset
FROM qc_commit_flush(%(object_key)s, %(size_bytes)s, %(blocks)s::jsonb, %(keys)s::jsonb)
