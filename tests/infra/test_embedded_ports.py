"""Ports picked for embedded services stay below the kernel's ephemeral range."""

from __future__ import annotations

from infra.embedded import ephemeral_ports_start, free_port_block, port_is_free


def test_picked_ports_are_never_ones_an_outgoing_connection_could_take() -> None:
    # A service restarted on a port inside the ephemeral range can find it taken as the source
    # port of an outgoing connection (the dev-stack restart test failed so once: SeaweedFS's S3
    # listener could not bind).
    low = ephemeral_ports_start()
    assert 1024 < low <= 65535
    for _ in range(200):
        base = free_port_block(8)
        assert base + 8 <= max(20000 + 1000, min(60000, low))
        assert all(port_is_free(base + offset) for offset in range(8))
