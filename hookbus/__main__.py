from hookbus.cli import main

raise SystemExit(main())
