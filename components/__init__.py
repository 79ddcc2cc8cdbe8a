"""The web app's parts: Gradio builders and event handlers for the page (lanes, inspector, figures,
stepper, controls, gallery, the Evaluation tab), the per-user session, and the model host that shares
one batch per pair. These are this project's page components, not Gradio's own. Gradio is imported here
and in app.py only; the engine (`easd`) never imports it."""
