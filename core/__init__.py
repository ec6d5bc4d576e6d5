"""Ground: settings, the database, errors and the S3 and Redis clients; imports no other QueueCore package."""
