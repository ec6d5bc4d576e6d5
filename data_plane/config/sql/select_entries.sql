-- An environment's entries whose key starts with a prefix (LIKE's wildcards escaped by the caller).
SELECT key, value FROM runtime_config
WHERE environment_id = %(environment_id)s AND key LIKE %(pattern)s ESCAPE '\'
ORDER BY key
