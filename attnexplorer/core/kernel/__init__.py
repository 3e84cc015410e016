"""The attention arithmetic, once, on torch tensors: the block kernel and ``attend``
(attention), the norms, positions (RoPE, ALiBi) and projections it is made of. Imports nothing
else of the core: the engine, the streamed path, fitting and a real model's forward all run it.
"""
