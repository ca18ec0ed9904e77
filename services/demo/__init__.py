"""``make demo``: the live pipeline on the local stack, as a typed report and a renderer."""
