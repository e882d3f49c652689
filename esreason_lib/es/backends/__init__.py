"""Population backends behind one protocol (`base`): member seeds in, rewards out; `registry.make_backend` picks one."""
