"""Evolution strategies: config and ask/tell (`core`), fitness shaping, noise, low-rank noise, the training loop
(`loop`) and the population backends (`backends/`)."""
