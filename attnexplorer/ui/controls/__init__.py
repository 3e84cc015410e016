"""The Controls dock (controls_panel): the preset's parameters (preset_controls), the mask
and the scale, and the compute's device and number type (compute_controls); the slider
they and a lesson step use (value_slider).
"""
