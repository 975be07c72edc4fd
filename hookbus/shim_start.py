# The installed hook command: PYTHON -I -S /abs/path/hookbus/shim_start.py hook ARGS (hookbus.shim.start).
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hookbus import shim
else:  # the folder on sys.path only for this import: its platform/ would shadow the stdlib's
    sys.path.insert(0, __file__.rpartition("/")[0])
    try:
        import shim
    finally:
        del sys.path[0]
if __name__ == "__main__":
    shim.start(sys.argv[1:])
