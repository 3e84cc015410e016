"""The compute: a session in, every intermediate out (engine), with the session's arrays and
stages on the device (device_inputs, stage_inputs), projections reused across edits
(projection_reuse), the mask's blocked cells, the memory check, and long inputs streamed
a block of rows at a time (long/).
"""
