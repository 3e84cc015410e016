"""The model window: File ▸ Open model… (controller; open_model_dialog asks, a job loads), a
real model's attention on one text (window; views and thumbnail_places, lens_strip,
head_view), its prediction, interventions, generation and head scores, and its figures
(figures, figure_files).
"""
