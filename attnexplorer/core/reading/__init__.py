"""Reading a result: one cell or one output row explained in numbers (explain,
explain_stages) and what the stage panels show (stage_views).
"""
