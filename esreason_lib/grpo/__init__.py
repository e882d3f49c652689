"""GRPO, the gradient baseline: config, the pure loss functions, and the loop (update, step, run)."""
