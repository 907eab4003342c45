"""Hosts of a fleet on one machine: ``hosts`` (network namespaces on a bridge, a process per
service), ``netlink`` (the links between them, slowed and cut) and ``faultproxy`` (connections
dropped, reset or stalled on purpose)."""
