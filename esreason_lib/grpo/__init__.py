"""GRPO, the gradient baseline: config, the pure loss functions, the loop (update, step, run), and TRL's
GRPOTrainer for paper scale (`trl_engine`)."""
