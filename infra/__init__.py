"""Running QueueCore: settings, service clients, migrations, Celery app, CLI, embedded stack."""
