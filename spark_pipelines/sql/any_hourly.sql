-- Whether a month has any usage: the scheduled run starts no JVM for an empty month.
SELECT EXISTS (SELECT 1 FROM usage_hourly WHERE hour >= %(since)s AND hour < %(until)s) AS found
