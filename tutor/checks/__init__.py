"""One check per exercise: ``tutor.checks.<name>(your_function_or_class)``.

Each check runs your code on several cases, compares with ``tutor.reference`` and shows ✅, ⏳
("not done yet") or ❌ with what differs and the likely cause. It never raises into your
notebook (unless ``TUTOR_STRICT=1``) and returns a ``CheckResult`` whose ``.passed`` is a bool.
"""

from tutor.checks._core import CheckFailed, CheckResult, RESULTS, yours_or_reference  # noqa: F401
from tutor.checks.nb01_dot_product_attention import *  # noqa: F401,F403
from tutor.checks.nb02_queries_keys_values import *  # noqa: F401,F403
from tutor.checks.nb03_masking import *  # noqa: F401,F403
from tutor.checks.nb04_multi_head_attention import *  # noqa: F401,F403
from tutor.checks.nb05_positional_encodings import *  # noqa: F401,F403
from tutor.checks.nb06_transformer_block import *  # noqa: F401,F403
from tutor.checks.nb07_gpt_model import *  # noqa: F401,F403
from tutor.checks.nb08_training import *  # noqa: F401,F403
from tutor.checks.nb09_modern_gpt import *  # noqa: F401,F403
from tutor.checks.nb10_scaling_up import *  # noqa: F401,F403
from tutor.checks.nb11_tokenization import *  # noqa: F401,F403
