"""Edits: pure functions from a session to a new, validated session (edits; stage_edits,
stage_tables and source_edits for the stages and the source sequence; token_sequence for
both sequences), and what one edit changed, for undo (session_change).
"""
