"""KFP component: fail the run with a message; the branch a pipeline takes for an input none of its other
branches accepts."""

from kfp import dsl

from kftrain_components.images import LAUNCH_IMAGE


@dsl.component(base_image=LAUNCH_IMAGE, install_kfp_package=False)
def fail(message: str, value: str = ""):
    """Fail the run: print `message` (and the offending `value`) and exit with status 2.

    Args:
        message: What was wrong and what is accepted.
        value: The value that was refused, shown after the message.
    """
    from kftrain.errors import fail_step

    fail_step(f"{message} (got {value!r})" if value else message, 2)
