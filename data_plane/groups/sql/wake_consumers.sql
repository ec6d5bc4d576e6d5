SELECT pg_notify('qc_publish', %(payload)s)
