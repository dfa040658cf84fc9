"""The daemon's listening ports: the probe and metrics server (``health``) and the round-end
notification receiver (``round_events/``), both on bounded servers.  They serve what they are
handed and import neither the commands nor the daemon.
"""
