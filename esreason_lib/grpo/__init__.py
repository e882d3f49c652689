"""GRPO, the gradient baseline: config, the pure loss functions, the update, vLLM rollouts and the training loop."""
