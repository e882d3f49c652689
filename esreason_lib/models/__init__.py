"""Models: the tiny zoo and its pretraining, loading, batched generation, the fp32-master optimizer, weights by
name, the vLLM engine and its rollouts, and GPU placement."""
