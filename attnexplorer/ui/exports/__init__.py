"""What leaves the window as files: figures (figures, figure_paint, svg_compat; the dialog in
figure_dialog, every panel headless in figure_batch from a ResultSource) and matrices
(matrix_export).
"""
