"""The pusher: the process that delivers push groups to their endpoints (``queuecore pusher``).

An edge like the HTTP API and the Kafka listener: it joins every push group as a member, pulls,
acks, nacks and extends through the data plane's door (``data_plane.service``) exactly as a
consumer does, and POSTs each message, signed, to its group's endpoint (docs/push.md). Any number
of pushers share the groups' partitions; one killed loses nothing (its leases come back).
"""
