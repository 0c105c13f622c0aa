"""Function vectors in ICL: sub-FV additivity, contextual reweighting, QK vs V.

Paper: Wang et al., causal decomposition of function vectors in in-context learning
(ICML 2026, arXiv 2605.16591), on Todd et al.'s function vectors (ICLR 2024, arXiv
2310.15213).

Files
-----
algorithm.py
    Function vectors and their additive decomposition (Todd et al. 2024; Wang et al.
    2026).
algorithm_decomp.py
    Function vectors split by demonstration: variant B and the QK-vs-V hybrids.
data.py
    Tasks for the function-vector analysis: synthetic permutations and
    word pairs.
model.py
    Function vectors on a :class:`~flowerbed.models.lm.CausalLM`: prompts,
    activations, patching.
model_task.py
    One task's function-vector analysis on a language model, end to end.
model_toy.py
    ``fv_toy``: a tiny GPT-2 trained on synthetic permutation ICL tasks (the
    spec's probe).
learner.py
    Learner ``function_vectors``: one ICL task's function vectors on a client's
    pairs.
strategy.py
    Strategy ``fv_decomposition``: the global function vector as a mix of client
    FVs.

Documentation: ``docs/methods/function_vectors.md``; scenarios:
``scenarios/function_vectors/smollm2_federated.yaml``,
``scenarios/function_vectors/toy_federated.yaml``,
``scenarios/function_vectors/toy_local.yaml``; tests:
``tests/methods/test_function_vectors.py``; experiments:
``benchmarks/methods/function_vectors_experiment.py``.
"""
