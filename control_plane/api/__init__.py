"""The ``/v1`` API: controllers that parse, call one service method and serialise."""
