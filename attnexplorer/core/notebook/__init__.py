"""How a session and a result show themselves in Jupyter: the weights heatmap as SVG or PNG
(figure) and the result a session computes to show itself (session_result). The session and
the result import these lazily, at display time only.
"""
