"""Round-end notifications (spec: Events, "Round end"): the verified receiver on its own port,
and the wake-ups it causes, here or on the replica that holds the merchant."""
