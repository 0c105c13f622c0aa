"""One package per method: its maths, learner, strategy, data and model side by side.

Each package's docstring names its paper and what each file holds. Nothing
outside ``flowerbed.methods`` imports a method: the platform finds them through
plugin discovery (a module that calls ``register``), as it finds a third-party
package declared in the ``flowerbed.plugins`` entry-point group, which has the same
shape. A method package never imports another; what two share lives in a shared
layer (``algorithms``, ``data``, ``models``, ``clients``, ``strategies``).
"""
