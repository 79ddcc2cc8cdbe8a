"""The web UI: Gradio builders for the page (lanes, inspector, figures, stepper, controls, the
Evaluation tab), the per-user session and the model host. Gradio is imported here and in app.py only;
the engine (`easd`) never imports it."""
