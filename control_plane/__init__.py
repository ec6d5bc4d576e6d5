"""HTTP edge of QueueCore: the Litestar application, middleware, error mapping, dashboard."""
