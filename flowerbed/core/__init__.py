"""The kernel: scenario schema, registry, messages and keys, seeds, cache, plugin discovery.

Imports nothing of flowerbed outside ``flowerbed.core``.
"""
