"""What a user edits, as immutable values: the ``Session`` (session), its mask, stages,
bounds (limits) and frozen arrays (session_arrays); where its values come from (tokenize,
embeddings, weights) and the ready-made sessions (presets).
"""
