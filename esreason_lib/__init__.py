"""esreason: Evolution Strategies vs GRPO for LLM reasoning, from a 1M-parameter Qwen2 to Qwen2.5 on GPUs.

Reference companion to "Understanding Evolution Strategies for LLM Reasoning: Broader Reasoning Coverage
than GRPO" (arXiv 2608.27351). See README.md for the map of modules.
"""

__version__ = "0.1.0"
