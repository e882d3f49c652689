"""Models: the tiny zoo and its pretraining, loading, batched generation, the fp32-master optimizer, weights by
name, and the vLLM engine."""
