"""The trained demo model: a small FluxPipeline that draws coloured shapes ("a red circle"), 64x64.

    shapes    the synthetic data set (12 classes: circle/square/triangle x red/green/blue/yellow)
    judge     a pixel-only judge: colour and shape of the one shape in a picture
    model     the pipeline's configuration and construction (diffusers FluxPipeline layout)
    train     VAE then transformer training (flow matching), on CPU torch or the tpu device
    evaluate  generate the 12 prompts over seeds and judge them

``python -m torch_tpu.demo --help`` for the command line.
"""
