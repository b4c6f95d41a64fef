"""Tests of registry.hub against the fake hub over loopback sockets."""
