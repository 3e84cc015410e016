"""How numbers are written and read: the panels' cell numbers and tick labels (display),
the explanations' numbers (number_text) and a number typed into a cell (expr).
"""
