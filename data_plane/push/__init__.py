"""Push groups: settings and signing secrets, the signed POST of a message to its endpoint, and the
record of failed pushes (docs/push.md). The pushers deliver through ``data_plane.service``."""
