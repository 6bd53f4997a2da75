from foundry.cli.main import main

raise SystemExit(main())
