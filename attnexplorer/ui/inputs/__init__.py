"""The Inputs dock: its tabs (inputs_panel) and pages (tokens, weights, stages, source),
the pieces they are built from (widgets) and the tables over the session's arrays
(table_models, table_view).
"""
