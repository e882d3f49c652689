"""GRPO, the gradient baseline: config, the pure loss functions, vLLM rollouts, and the loop (update, step, run)."""
