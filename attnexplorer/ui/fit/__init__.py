"""The Fit dock: the target editor (target), the run controls (dock) and the fit running off
the GUI thread (runner).
"""
