"""An example flowerbed plugin: bring your own data, model, learner and strategy.

Each module registers components under the names a scenario writes; flowerbed
finds the modules through this distribution's ``flowerbed.plugins`` entry point
(see ``pyproject.toml``), by reading their source, and imports a module only
when a scenario names one of its components.

- ``data.py``: dataset ``circle_blobs`` (Gaussian classes around a circle).
- ``model.py``: model ``tanh_mlp`` (a torch network the ``sgd`` learner trains).
- ``algorithm.py``: the maths of nearest-centroid classification (numpy only).
- ``learner.py``: learner ``centroids`` (client side: class sums, evaluation).
- ``strategy.py``: strategy ``pooled_centroids`` (server side: one round of sums).
"""
